(matmul (ones 2 3) (zeros 3 2))
