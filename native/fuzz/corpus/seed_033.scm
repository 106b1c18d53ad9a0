(param a 0.5) (softplus (* a u))
