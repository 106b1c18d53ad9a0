(param a 0.5)
(< a 0.75)
