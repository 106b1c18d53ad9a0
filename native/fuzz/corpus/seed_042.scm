'(1 . 2) '(a b . c) (cadr '(1 2)) (cddr '(1 2 3)) (caddr '(1 2 3)) (cdddr '(1 2 3 4))
