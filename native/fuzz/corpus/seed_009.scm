(map (lambda (x y) (* x y)) '(1 2 3) (list 4.0 5.0 6.0))
