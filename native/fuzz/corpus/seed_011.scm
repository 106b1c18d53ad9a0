(define (f . xs) (length xs)) (f 1 2 3)
