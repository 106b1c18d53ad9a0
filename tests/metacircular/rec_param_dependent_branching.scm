(param a 0.6 (between 0 1))
;; the control flow depends on the parameter: lanes take different branches
(define (steps x n) (if (> x 0.3) (steps (* x a) (+ n 1)) (+ n x)))
(steps 1.0 0)
