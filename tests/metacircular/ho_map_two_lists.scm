(param a 0.5)
(param b 2.0)
(apply + (map (lambda (x y) (+ (* a x) (* b y))) '(1 2 3) '(4 5 6)))
