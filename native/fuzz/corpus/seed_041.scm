(inv (zeros 2 2)) (cholesky (mat (vec 1 2) (vec 2 1)))
