;; guile: skip
(param a 1e-5)
(loop ((i 0) (x 0.0))
  (if (= i 100000) x (recur (+ i 1) (+ x (* a (sin x)) a))))
