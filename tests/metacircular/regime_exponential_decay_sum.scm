;; inputs: {"t": 1.5}
(param a 2.0 positive)
(param k 0.7 positive)
(param c 0.1)
(+ (* a (exp (* -1 k t))) c)
