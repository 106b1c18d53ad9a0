(define x 1) (define x 2) x
