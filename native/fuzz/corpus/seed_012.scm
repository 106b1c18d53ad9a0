(define (g a . rest) (cons a rest)) (g 1 2 3)
