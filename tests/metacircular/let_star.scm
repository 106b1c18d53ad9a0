(param a 0.5)
(let* ((x (* a 2)) (y (+ x 1)) (x (* x y)))
  (+ x y))
