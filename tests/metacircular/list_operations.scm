(param a 1.5)
(define xs (list 1 2 3 4 5))
(+ (length xs) (list-ref xs 2) (car (list-tail xs 3)) (car (reverse xs))
   (length (append xs '(6 7) '() '(8))) (* a (cadr xs)) (car (cddr xs)) (car (cdddr xs)))
