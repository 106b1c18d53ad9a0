(param a 0.5) (param k 2.0) (vsum (sigmoid (* k (- x a))))
