(eq? 'a 'a) (eqv? 1.0 1) (boolean? #f) (symbol? 'x) (procedure? car) (null? '()) (pair? '(1)) (list? '(1 . 2))
