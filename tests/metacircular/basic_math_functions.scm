(param a 0.4 (between 0 1))
(+ (exp a) (log (+ 1 a)) (sqrt (+ a 2)) (sin a) (cos a) (tan a) (asin a) (acos a)
   (atan a) (atan a 2.0) (tanh a) (square a) (abs (- a)) (expt a 3) (expt 2.0 a))
