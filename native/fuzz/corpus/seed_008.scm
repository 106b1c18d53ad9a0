(define (compose f g) (lambda (x) (f (g x)))) ((compose sin cos) 0.3)
