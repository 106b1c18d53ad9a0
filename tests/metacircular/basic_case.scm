(param a 1.25)
(define (weight s)
  (case s
    ((alpha beta) 1.0)
    ((gamma) 2.0)
    ((1 2 3) 4.0)
    (else 8.0)))
(* a (+ (weight 'beta) (weight 'gamma) (weight 2) (weight 'omega)))
