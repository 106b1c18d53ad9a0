(define M (mat (vec 2 1) (vec 1 3))) (list (det M) (logdet M) (trace M) (ref (cholesky M) 1 1) (solve M (vec 1 2)))
