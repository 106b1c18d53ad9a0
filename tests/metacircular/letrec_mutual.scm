(param a 0.3)
(letrec ((ev? (lambda (n) (if (= n 0) #t (od? (- n 1)))))
         (od? (lambda (n) (if (= n 0) #f (ev? (- n 1))))))
  (if (and (ev? 10) (od? 7)) (* a 2.0) a))
