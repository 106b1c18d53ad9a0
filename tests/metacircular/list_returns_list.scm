(param a 0.5)
(list (* a 2) 'tag (list 1 2) #t)
