(param a 0.999)
(define (prod n) (if (= n 0) 1.0 (* a (prod (- n 1)))))
(prod 300)
