(param a 0.3)
(param b 0.6)
(define (curry3 f) (lambda (x) (lambda (y) (lambda (z) (f x y z)))))
((((curry3 (lambda (x y z) (+ (* x y) z))) a) b) 1.0)
