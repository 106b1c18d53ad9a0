(param a 2.7)
(+ (* a (floor 2.5)) (ceiling 2.1) (round 3.5) (truncate -2.7) (exact->inexact 3))
