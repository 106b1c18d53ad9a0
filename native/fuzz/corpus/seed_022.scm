(equal? '(a (b c)) (list 'a (list 'b 'c)))
