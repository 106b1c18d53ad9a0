(letrec* ((a 1) (b (+ a 1))) (list a b))
