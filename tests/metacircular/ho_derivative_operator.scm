(param a 1.3)
(define (deriv f h) (lambda (x) (/ (- (f (+ x h)) (f (- x h))) (* 2 h))))
(define (cube x) (* x x x))
((deriv cube 1e-3) a)
