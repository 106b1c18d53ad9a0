(param a 3.0)
(define table '((x . 1.5) (y . 2.5)))
;; a clause with a test only gives the test's value
(+ (cdr (cond ((assq 'y table)) (else (cons 'none 0.0))))
   (cond ((memq 'z '(x y)) 1.0) ((* a a)))
   a)
