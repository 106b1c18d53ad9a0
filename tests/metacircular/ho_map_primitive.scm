(param a 0.4)
(apply + (map exp (map (lambda (x) (* a x)) '(0.5 1.0 1.5))))
