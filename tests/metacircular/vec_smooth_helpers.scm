;; guile: skip
;; inputs: {"x": 0.3}
(param a 1.2)
(+ (sigmoid (* a x)) (softplus (- a x)) (vsum (outer (vec a 1.0) (ones 2))) (vsum (zeros 3)))
