(param a 1e308) (* a a 10)
