(param a 0.9)
(+ (when (> a 0) (* a 2) (* a 3))
   (unless (< a 0) (* a a)))
