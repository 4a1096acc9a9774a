package p

type T struct{ len int } // a field: reached as t.len, hides nothing

func (T) cap() int { return 0 } // a method: likewise

func f(new int) int { // want `new shadows the predeclared identifier new`
	min := 1 // want `min shadows the predeclared identifier min`
	return new + min
}

func g(v any) {
	switch clear := v.(type) { // want `clear shadows the predeclared identifier clear`
	case int:
		_ = clear
	}
len:
	for {
		break len
	}
}

var real = 1 // want `real shadows the predeclared identifier real`

type any2 = any

func h(count int) int { return count }
