;; inputs: {"s": 0.7}
(param vmax 1.2 positive)
(param km 0.4 positive)
(/ (* vmax s) (+ km s))
