(define v (vec 1 2 3)) (list (dot v v) (norm v) (vsum v) (outer v v) (transpose (mat (vec 1 2 3))))
