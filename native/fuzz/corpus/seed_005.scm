(let loop ((i 0) (s 0.0)) (if (= i 10) s (loop (+ i 1) (+ s (* i 0.5)))))
