(param a 0.9)
;; recursion whose values (not control) depend on the parameter
(define (p n) (if (= n 0) 1.0 (+ 1.0 (* a (p (- n 1))))))
(p 60)
