(param a 0.8)
(define (f v) (or (and (> v 1) 'big) (and (> v 0.5) (* v a)) 0.0))
(+ (f 0.7) (f 0.2) (if (eq? (f 3) 'big) a 0.0) (if (and) 1.0 0.0) (if (or) 1.0 0.0))
