(param a 0.5) (param b 1.0 positive) (+ (* a x) b)
