(param a 1.0)
;; (1 - a 1e-5)^100000, about exp(-a)
(define (iter i x) (if (= i 0) x (iter (- i 1) (* x (- 1 (* a 1e-5))))))
(iter 100000 1.0)
