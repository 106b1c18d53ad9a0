(define (pick n) (if (> n 2) 'many 'few))
(pick 3)
