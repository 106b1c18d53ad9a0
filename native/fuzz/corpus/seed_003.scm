(param p 0.3 (between 0 1)) (define (f x) (* p (exp (- x)))) (f 2.0)
