(assv 2 '((1 . a) (2 . b))) (assoc '(x) '(((x) . 1)))
