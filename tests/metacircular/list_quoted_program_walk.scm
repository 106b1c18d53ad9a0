(param a 2.0)
;; a tiny interpreter for arithmetic expressions, inside the interpreted program
(define (calc e)
  (cond ((number? e) e)
        ((eq? e 'a) a)
        ((eq? (car e) 'add) (+ (calc (cadr e)) (calc (caddr e))))
        ((eq? (car e) 'mul) (* (calc (cadr e)) (calc (caddr e))))
        (else 0.0)))
(calc '(add (mul a a) (mul 3 (add a 1))))
