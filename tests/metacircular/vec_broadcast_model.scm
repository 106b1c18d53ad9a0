;; guile: skip
;; inputs: {"xs": [0.1, 0.5, 1.0, 2.0]}
(param a 0.8)
(param b -0.2)
(vsum (square (+ (* a xs) b)))
