(param a 1e-5)
(define (ping i acc) (if (= i 0) acc (pong (- i 1) (+ acc a))))
(define (pong i acc) (if (= i 0) acc (ping (- i 1) (- acc (* 0.5 a)))))
(ping 100000 0.0)
