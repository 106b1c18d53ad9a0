(param a 0.25)
(define env (list (cons 'x 2.0) (cons 'y a) (cons 'z 4.0)))
(define (get k) (cdr (assq k env)))
(+ (* (get 'x) (get 'y)) (cdr (assv 2 '((1 . 10) (2 . 20)))) (cdr (assoc '(k) (list (cons '(k) a)))))
