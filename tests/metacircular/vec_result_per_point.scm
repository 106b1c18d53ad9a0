;; guile: skip
;; inputs: {"xs": [0.0, 0.5, 1.0, 1.5, 2.0]}
(param a 1.5 positive)
(param b 0.2)
(/ (* a xs) (+ b xs 1.0))
