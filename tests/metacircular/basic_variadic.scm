(param a 1.5)
(param b -0.5)
(- (+ a b a b 1) (* a b 2) (/ a 4) (max a b 0.1) (min a b 0.1))
