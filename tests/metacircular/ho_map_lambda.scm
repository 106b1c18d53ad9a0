(param a 0.5)
(define xs '(1.0 2.0 3.0 4.0))
(apply + (map (lambda (x) (* a x x)) xs))
