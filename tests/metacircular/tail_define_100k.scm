(param a 0.99999)
(define (iter i x) (if (= i 0) x (iter (- i 1) (* a x))))
(iter 100000 1.0)
