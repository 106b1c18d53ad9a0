(param a 0.25)
(+ (* 3 4) (- 10 7) (quotient 17 5) (remainder 17 5) (modulo -7 3) a)
