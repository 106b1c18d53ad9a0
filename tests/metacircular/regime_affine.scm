;; inputs: {"x": 2.0}
(param a 0.5)
(param b 1.0)
(+ (* a x) b)
