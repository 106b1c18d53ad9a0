;; inputs: {"s": 0.8}
(param vmax 1.0 positive)
(param kd 0.5 positive)
(param n 2.0 positive)
(/ (* vmax (expt s n)) (+ (expt kd n) (expt s n)))
