(param k 1.7)
(define (scale x) (* k x offset))
(define offset 0.5)
(scale 3.0)
