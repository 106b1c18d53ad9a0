;; guile: skip
(param a 0.95)
(loop ((i 0) (x 1.0))
  (if (= i 40) x (recur (+ i 1) (+ (* a x) 0.01))))
