(define (f n) (+ 1 (f n))) (f 1)
