;; guile: skip
(param a 0.5)
(define m (mat (vec 2.0 a) (vec a 3.0)))
(define v (vec 1.0 a))
(+ (dot v (matvec m v)) (det m) (trace (matmul m m)) (ref (solve m v) 1) (logdet m) (norm v)
   (ref (transpose m) 0 1) (vsum (ref (cholesky m) 1)) (ref (inv m) 0 0) (rows m) (size v))
