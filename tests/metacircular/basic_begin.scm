(param a 1.5)
(begin (+ a 1) (* a a) (- (* a 4) 1))
